"""The dashboard's rejections page (see ``tenure.dashboard.nav``)."""

from tenure.dashboard import nav

nav.render("rejections")
