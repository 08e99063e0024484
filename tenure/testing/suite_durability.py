"""What a backend declares about durability, and that its store reports it.

Every backend says what an acknowledged write survives (``Characteristics.durability``): a
claim the store forgets after acknowledging it is handed out again with the same token, which
fences admit, so a caller must be able to tell a store that keeps nothing (``volatile``) from one
that does. A store that is not volatile proves it with the ``restartable_store`` hook (the
restart test); a volatile one is reported as such, in ``health()`` and in the restart test's skip.
"""

from __future__ import annotations

import tenure
from tenure.testing.kit import Kit


class DurabilityTests:
    def test_the_backend_declares_what_an_acknowledged_write_survives(self, kit: Kit) -> None:
        declared = kit.durability
        assert isinstance(declared, tenure.Durability), (
            f"{kit.characteristics.name}: Characteristics.durability is {declared!r}; declare one of "
            f"{', '.join(d.value for d in tenure.Durability)} (docs/backends/writing-a-backend.md, Durability)")

    def test_the_store_reports_its_durability_a_volatile_one_too(self, kit: Kit, store: tenure.Store) -> None:
        declared = kit.durability
        assert declared is not None, "the backend declares no durability"
        assert store.health()["durability"] == declared.value  # "volatile" for a store that keeps nothing
