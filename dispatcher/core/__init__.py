"""Pure data and rules: the job and node model, the plan types, errors, request checking, elastic scaling, GPU specs, runtime prediction. No Redis, clock, OS or chance."""
