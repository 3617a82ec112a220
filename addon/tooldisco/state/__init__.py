"""Session state and its stores: the protocol and codecs (``base``), on disk (``disk``), in Redis
(``redis``), and ``factory.open_store``, which picks one from the config."""
