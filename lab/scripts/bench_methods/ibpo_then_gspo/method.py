"""Registers the bench-only ``ibpo_then_gspo`` method (:mod:`ibpo_then_gspo`) with the launcher's registry: IBPO's
entry with this package's trainer, reading the ``ibpo:`` block."""

from __future__ import annotations

import dataclasses

from ibpo_then_gspo import trainer
from recipe.common.methods import register_method
from recipe.ibpo.method import METHOD as IBPO

METHOD = register_method(dataclasses.replace(
    IBPO, name="ibpo_then_gspo", options_block=IBPO.name, trainer=trainer, owned_estimators=(), block_file="",
    block_header="", module=__name__))
