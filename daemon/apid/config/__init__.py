"""Configuration: the two files read at start into frozen typed values, the declaration of a
setting, and plugin settings."""
