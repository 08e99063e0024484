"""The dashboard's parked and scheduled jobs page (see ``tenure.dashboard.nav``)."""

from tenure.dashboard import nav

nav.render("parked")
