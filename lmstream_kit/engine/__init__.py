"""The engine adapter: the only layer that touches Spark (source, sink, session, listener, cluster)."""
