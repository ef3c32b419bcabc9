"""Default policy data: acceptance priors, stack factors, rules (YAML)."""
