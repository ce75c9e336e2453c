"""The torch-free schedule core: the one simulator, R/S derivation, budgets and solutions."""
from remat.schedule.budget import checkpoint_all_peak, parse_budget
from remat.schedule.rs import checkpoint_all, cheapest_r, from_checkpoints, s_from_r, tighten
from remat.schedule.simulate import Event, Simulation, simulate
from remat.schedule.solution import SOLUTION_FORMAT, Solution

__all__ = ["Event", "SOLUTION_FORMAT", "Simulation", "Solution", "cheapest_r", "checkpoint_all",
           "checkpoint_all_peak", "from_checkpoints", "parse_budget", "s_from_r", "simulate",
           "tighten"]
