"""The dashboard's leases page (see ``tenure.dashboard.nav``)."""

from tenure.dashboard import nav

nav.render("leases")
