"""Running under systemd: sd_notify, the watchdog and the STATUS= line."""
