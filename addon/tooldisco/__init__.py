"""tooldisco: the tool-discovery engine behind ``addon/tool_discovery.py``.

Only ``glue`` (the mitmproxy addons) and ``watch`` (mitmweb's view) import mitmproxy: the API
packages, policies, search, session stores, the engine and the phantom loop are testable
without a proxy or socket. The layers and their import rules: docs/layout.md; ``lint-imports`` checks them.
"""
