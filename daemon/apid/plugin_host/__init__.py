"""Hosting plugins: discovery through entry points and binding to their IO State (`discovery`),
the rule set in force (`rules`), their migrations (`migrations`), their start-up and shutdown
hooks (`lifecycle`), and `apid new-plugin` (`scaffold`)."""
