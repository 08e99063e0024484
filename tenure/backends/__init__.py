"""Built-in backends, imported lazily by ``tenure.core.registry``."""
