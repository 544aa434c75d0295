"""Configuration read at start: the settings from the environment (`settings`) and the rules file
(`rules_file`). Above the core, below everything that runs: no thread, no metric, no API call."""
