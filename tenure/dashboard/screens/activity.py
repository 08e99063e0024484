"""The dashboard's activity page (see ``tenure.dashboard.nav``)."""

from tenure.dashboard import nav

nav.render("activity")
