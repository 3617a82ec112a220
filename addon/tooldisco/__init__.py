"""tooldisco: the tool-discovery engine behind ``addon/tool_discovery.py``.

No mitmproxy import anywhere in this package: providers, strategies, search,
sessions, stream codecs and the phantom loop are testable without a proxy or socket.
"""
