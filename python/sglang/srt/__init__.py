"""SRT: the serving runtime (platforms, plugins, runtime context, engine)."""
