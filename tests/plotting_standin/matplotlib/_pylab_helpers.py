"""Stand-in matplotlib._pylab_helpers: the open figures' managers, the active one last."""

from typing import ClassVar


class Gcf:
    figs: ClassVar[dict] = {}

    @classmethod
    def get_all_fig_managers(cls):
        return list(cls.figs.values())

    @classmethod
    def get_active(cls):
        return next(reversed(cls.figs.values()), None)

    @classmethod
    def set_active(cls, manager):
        cls.figs.pop(manager.num, None)
        cls.figs[manager.num] = manager

    @classmethod
    def destroy_all(cls):
        cls.figs.clear()
