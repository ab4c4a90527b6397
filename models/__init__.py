"""torch nn.Modules only: no file, UI or process handling."""
