"""The dashboard's overview page (see ``tenure.dashboard.nav``)."""

from tenure.dashboard import nav

nav.render("overview")
