"""What operators read, apart from the protocol in ``tenure.core``: the dashboard's and the
metrics' shared snapshot of a store (``snapshot``), paging over a store's indexes for the
backends that keep them (``paging``), and plain JSON for export (``export``). Views import the
core; the core never imports them."""
