"""One small script per dashboard page, each naming its view for ``tenure.dashboard.nav``."""
