"""LeRobot v2.1 and v3.0 to and from the episode model, and its check."""

from __future__ import annotations

from .api import (
    FramesMode,
    ImportReport,
    LeRobotPart,
    check,
    delta_window,
    export_lerobot,
    import_lerobot,
    read_lerobot,
    write_lerobot,
)
from .check import CheckReport, Problem, check_lerobot, check_meta
from .write import WriteOptions, WriteReport

__all__ = ['WriteOptions', 'WriteReport', 'delta_window', 'read_lerobot', 'write_lerobot', 'check', 'import_lerobot', 'export_lerobot', 'FramesMode', 'ImportReport', 'LeRobotPart', 'Problem', 'CheckReport', 'check_meta', 'check_lerobot']
