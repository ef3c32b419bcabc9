"""The serving stacks as specplug sees them: the adapter protocol (:mod:`.protocol`), the base adapter
(:mod:`.base`), version windows (:mod:`.windows`), metric sources (:mod:`.metrics`) and the registry
(:mod:`.registry`). A plugin subclasses :class:`specplug.stacks.base.BaseAdapter`."""
