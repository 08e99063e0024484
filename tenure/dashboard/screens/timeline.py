"""The dashboard's timeline page (see ``tenure.dashboard.nav``)."""

from tenure.dashboard import nav

nav.render("timeline")
