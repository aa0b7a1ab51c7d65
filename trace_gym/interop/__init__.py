"""Interoperability: vector envs, robustness wrappers, SB3, and the HTTP env server and client.

Submodules are imported on use (SB3 and the server pull in optional dependencies):

* :mod:`trace_gym.interop.vector`: ``gym.make_vec`` in sync and async modes (imported by ``trace_gym``);
* :mod:`trace_gym.interop.robustness`: renamed / distractor / shuffled / reworded tool views;
* :mod:`trace_gym.interop.candidates`: a finite list of candidate actions of any state;
* :mod:`trace_gym.interop.sb3`: a fixed-size numeric view with a ``Discrete`` action, for stable-baselines3;
* :mod:`trace_gym.interop.server` / :mod:`trace_gym.interop.client`: ``trace env-serve`` and its client.
"""
