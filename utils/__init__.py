"""Backend service layer: plain Python, no Gradio. The UI and the CLI both call these modules."""
