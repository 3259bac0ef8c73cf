"""Steps (processes): each module declares one step type, its config model and its implementation."""
