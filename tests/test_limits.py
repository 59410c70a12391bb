"""Limits: the tunables passed in (gpusolve/limits.py)."""
import dataclasses

import pytest

from gpusolve.limits import DEFAULT, POSITIVE, Limits


def test_defaults_are_one_frozen_object():
    assert DEFAULT == Limits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT.chunk_rows = 1


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Limits)])
def test_a_bad_value_is_refused_with_the_field_named(name):
    """Below the least value (1 for what sizes a step or divides a room, else 0), a float or a bool:
    ValueError naming the field; the least value itself is taken."""
    least = 1 if name in POSITIVE else 0
    for bad in (least - 1, 2.5, True):
        with pytest.raises(ValueError, match=rf"^Limits\.{name} must be an integer of at least {least}, not "):
            Limits(**{name: bad})
    assert getattr(Limits(**{name: least}), name) == least
