"""The dashboard's job page (see ``tenure.dashboard.nav``)."""

from tenure.dashboard import nav

nav.render("job")
