"""How the launcher hands settings to the Streamlit app: environment variables, not argv.

Environment variables keep the store URL (which may hold a password) and the admin secret
out of ``ps`` listings; the app reads them once per process.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from tenure.core.errors import InvalidArgument, quoted
from tenure.core.options import parse_url

URL_ENV = "TENURE_DASHBOARD_URL"
REFRESH_ENV = "TENURE_DASHBOARD_REFRESH"
ADMIN_SECRET_ENV = "TENURE_DASHBOARD_ADMIN_SECRET"  # set by the launcher only with --admin
FALLBACK_URL_ENV = "TENURE_URL"
DEFAULT_URL = "sqlite:///tenure-demo.db"
DEFAULT_REFRESH = 1.0
ADMIN_ACTOR = "dashboard-admin"  # the owner recorded in history for admin actions


@dataclass(frozen=True)
class Config:
    url: str = field(repr=False)
    refresh: float = DEFAULT_REFRESH
    admin_secret: str | None = field(default=None, repr=False)

    @property
    def admin(self) -> bool:
        return bool(self.admin_secret)

    def scrub(self, text: str) -> str:
        """``text`` without the URL's password or the admin secret, for anything shown."""
        for secret in (parse_url(self.url).password, self.admin_secret):
            if secret:
                text = text.replace(secret, "***")
        return text


def refresh_seconds(value: object) -> float:
    """A refresh interval: seconds > 0, or 0 for no automatic refresh."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # OverflowError: float(10**400)
        raise InvalidArgument(f"refresh must be a number of seconds, got {quoted(value)}") from None
    if isinstance(value, bool) or not math.isfinite(seconds) or not 0 <= seconds <= 3600:
        raise InvalidArgument(f"refresh must be from 0 (off) to 3600 seconds, got {quoted(value)}")
    return seconds


def from_env(env: dict[str, str] | None = None) -> Config:
    env = dict(os.environ) if env is None else env
    url = env.get(URL_ENV) or env.get(FALLBACK_URL_ENV) or DEFAULT_URL
    try:
        parse_url(url)
    except InvalidArgument:
        # The parser quotes the URL, and a URL may hold a password: name the variable instead.
        raise InvalidArgument(f"{URL_ENV} (or {FALLBACK_URL_ENV}) is not a store URL "
                              "like sqlite:///jobs.db (not shown: it may hold a password)") from None
    refresh = refresh_seconds(env.get(REFRESH_ENV, DEFAULT_REFRESH))
    return Config(url=url, refresh=refresh, admin_secret=env.get(ADMIN_SECRET_ENV) or None)
