"""Developer scripts: model export, label extraction, the local stack. Never packaged."""
