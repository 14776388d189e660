"""What plugins declare to the daemon beside their settings (`apid.config.plugin_settings`): the
actions of a controller and their rules. Below every package that reads them; plugins import
them from `apid.plugin`, the public face."""
