"""The proxy's own network: its upstream client and the live relay (no mitmproxy import)."""
