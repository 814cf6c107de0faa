"""The reward library: built-in GRPO rewards, user reward files, and the safe wrapper every call goes through.

    import rewards
    fn = rewards.get("correct_numeric")                 # a SafeReward with TRL's signature
    fn(["Answer: 85"], answer=["85"])                   # [1.0]
    rewards.get("my_rewards.py:brevity", timeout_s=2)   # user code runs in a child process
    rewards.load("my_rewards.py")                       # every public function of the file
    rewards.names(), rewards.describe("length_target")
    rewards.parse_reward_list("format_soft:0.5,correct_numeric")

Rewards never raise inside training: faults become None scores plus events (SafeReward.drain_events).
This package must not import the trainer (local_grpo) or any model code.
"""

from rewards.errors import RewardSpecError
from rewards.registry import (SUCCESS_THRESHOLD, describe, get, is_success, load, name_uniquely, names, parse_reward_list,
                              reward_max, unique_keys)
from rewards.safe import SafeReward

__all__ = ["SUCCESS_THRESHOLD", "RewardSpecError", "SafeReward", "describe", "get", "is_success", "load", "name_uniquely", "names",
           "parse_reward_list", "reward_max", "unique_keys"]
