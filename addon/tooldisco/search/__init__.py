"""Tool search: the backends that find deferred tools, and the phantom tool's front end.

``factory.make_searcher(name)`` gives a ``Searcher`` for one of the configured backend names;
``phantom_query.run_query`` answers the model's call to the search tool with it, and
``budget.run_query_async`` does so off the event loop within a wall-clock budget. No mitmproxy
in here. The package imports none of its modules: importers name the module they use, so no
module here depends on the package (and through it on every backend).
"""
