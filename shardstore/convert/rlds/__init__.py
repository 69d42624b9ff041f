"""RLDS (TFDS TFRecord folders) to and from the episode model, without TensorFlow; its check, and the
LeRobot -> RLDS mapping spec (which reads episodes, never LeRobot's files)."""

from __future__ import annotations

from .api import (
    RldsInfo,
    RldsShard,
    decode_example,
    encode_episode,
    export_rlds,
    import_rlds,
    read_rlds,
    read_rlds_info,
    write_rlds,
)
from .check import RldsCheckReport, check_rlds, report_path
from .lerobot_mapping import (
    DEFAULT_MAIN_CAMERAS,
    FramesFn,
    MappingReport,
    chw_to_hwc,
    lerobot_to_rlds,
    video_frames,
    write_lerobot_rlds,
)

__all__ = ['RldsInfo', 'RldsShard', 'decode_example', 'encode_episode', 'export_rlds', 'import_rlds', 'read_rlds', 'read_rlds_info', 'write_rlds', 'RldsCheckReport', 'check_rlds', 'report_path', 'DEFAULT_MAIN_CAMERAS', 'FramesFn', 'MappingReport', 'chw_to_hwc', 'lerobot_to_rlds', 'video_frames', 'write_lerobot_rlds']
