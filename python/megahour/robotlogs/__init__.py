"""Robot logs as labs record them, converted into megahour's raw episode.

- ``mapping``: the per-robot mapping file (which recorded topic or dataset is which camera, the joint
  states, the action), loaded and checked.
- ``convert``: the format-independent core: time order, dropped and repeated frames, the report, the
  raw episode written with its labels.
- ``ros2`` (ROS 2 recordings in MCAP, CDR), ``ros1`` (ROS 1 bags), ``hdf5`` (teleoperation episodes in
  the ALOHA layout): one reader per format, each yielding the mapped streams.
- ``formats``: which format a file is, and its converter.
"""
