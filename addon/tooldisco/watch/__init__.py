"""What tool discovery did, shown in mitmweb and the mitmproxy console with mitmproxy's own means.

Why a package of its own: the engine has no mitmproxy import and must keep none; like
``glue`` (the addons), this package may import mitmproxy, and everything that speaks
mitmproxy's view API (flows, comments, markers, contentviews) lives here, fed by what the
engine already produces (its telemetry ``Record``, its adapters, the answers of the proxy's own
rounds). Nothing here changes a byte that goes upstream or to the
client: it only reads, and adds flows and annotations to the view.
"""
