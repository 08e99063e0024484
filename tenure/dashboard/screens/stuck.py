"""The dashboard's stuck page (see ``tenure.dashboard.nav``)."""

from tenure.dashboard import nav

nav.render("stuck")
