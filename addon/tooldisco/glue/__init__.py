"""The mitmproxy glue: one addon per concern, in the manner of mitmproxy's own addons.

Every decision lives below (engine, apis, policy…), which never imports mitmproxy; these
addons hand flows to the engine and its answers back to the flows. ``addon/tool_discovery.py``
builds them and puts them in mitmproxy's chain in the order their hooks must run.
"""
