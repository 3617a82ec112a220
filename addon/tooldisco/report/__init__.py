"""``tooldisco report``: what tool discovery did and saved, read from telemetry JSONL files.

``page`` streams the records into bounded aggregates and writes one HTML page with plots (the
``report`` extra); ``selector`` is the api strategy's Markdown tables over the same records.
Both ship in the package, so an installed wheel reports without a checkout.
"""
