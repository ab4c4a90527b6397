"""Gradio only: one module per tab (each exports `build(ctx)`), plus shared components. No torch here."""
