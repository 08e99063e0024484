"""The dashboard's workers page (see ``tenure.dashboard.nav``)."""

from tenure.dashboard import nav

nav.render("workers")
