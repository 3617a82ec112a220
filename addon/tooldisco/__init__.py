"""tooldisco: the tool-discovery engine behind ``addon/tool_discovery.py``.

No mitmproxy import anywhere in this package but ``watch`` (the mitmweb view): the API
packages, policies, search, session stores and the phantom loop are testable without a proxy
or socket. The layers and their import rules: README, "Layout"; ``lint-imports`` checks them.
"""
