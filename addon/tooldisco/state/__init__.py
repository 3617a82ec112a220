"""Session state and its stores: on disk (``disk``) and in Redis (``redis``)."""
