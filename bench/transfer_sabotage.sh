#!/usr/bin/env bash
# Breaks the fine-tune on purpose, one way at a time, in a throwaway clone of HEAD, and runs tests/test_transfer.py
# against each: every line should end "failed" (bench/RESULTS.md, "Fine-tuning transfers", has the last results).
#     bash bench/transfer_sabotage.sh          # about 2 min on 2 cores
set -u
cd "$(dirname "$0")/.."
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
git clone -q . "$work/repo" && ln -s "$(cd .. && pwd)/shared" "$work/shared" 2>/dev/null
cd "$work/repo"
run() {
  OMP_NUM_THREADS=1 python -m pytest -q -rf -p no:cacheprovider tests/test_transfer.py > "$work/$1.log" 2>&1
  echo "$1: $(tail -1 "$work/$1.log")"; grep -h "^E  .*assert" "$work/$1.log" | head -4
  git checkout -q -- .
}
cat > "$work/edit.py" <<'P'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
assert old in text, f"{path}: the sabotage's anchor is gone: {old!r}"
open(path, "w").write(text.replace(old, new, 1))
P
E="python $work/edit.py"
# 1. a fine-tune's learning rate x100 (what the batch probe once did to F5)
$E utils/training/optimization.py '    peak = float(cfg.lr) if peak is None else peak' \
  '    peak = (float(cfg.lr) if peak is None else peak) * (100 if cfg.init else 1)'
$E utils/mms/adapter.py '        return self.machine.lr' '        return self.machine.lr * 100'  # MMS keeps its own constant rate
$E utils/omnivoice/adapter.py '        peak, warmup = self.machine.lr, self.warmup()' \
  '        peak, warmup = self.machine.lr * (100 if self.cfg.init else 1), self.warmup()'  # the recipe's own schedule
run "rate x100 on a fine-tune"
# 2. the base's weights not loaded
$E utils/matcha/adapter.py '            model.load_state_dict(ckpt.load_weights(ctx.resume_from or cfg.init))' \
  '            model.load_state_dict(ckpt.load_weights(ctx.resume_from)) if ctx.resume_from else None'
$E utils/f5/base.py '        model.load_state_dict(weights)' '        pass'
$E utils/mms/base.py '        model, info = VitsModel.from_pretrained(path.parent, output_loading_info=True)' \
  '        model, info = VitsModel(__import__("transformers").VitsConfig.from_pretrained(path.parent)), {}'
$E utils/omnivoice/base.py '    if weights:' \
  '    [torch.nn.init.normal_(p, 0, 0.02) for p in model.parameters()]
    if weights:'
run "base not loaded"
# 3. the known symbols' rows re-initialised after loading (MMS and OmniVoice: read one row off, as a vocabulary out of
#    order; a seeded re-initialisation draws the rows its base started from, which its short training barely moved)
$E utils/matcha/adapter.py '            model.grow_tables(len(self.frontend.symbols), len(self.speakers))' \
  '            model.grow_tables(len(self.frontend.symbols), len(self.speakers)); __import__("torch").nn.init.normal_(model.encoder.emb.weight, 0, 0.1) if not ctx.resume_from else None'
$E utils/f5/base.py '    _grow(model, text, added, log)' \
  '    _grow(model, text, added, log); __import__("torch").nn.init.normal_(model.transformer.text_embed.text_embed.weight) if resume_from is None else None'
$E utils/mms/base.py '    model.text_encoder.encoder.layerdrop = 0.0' \
  '    model.text_encoder.encoder.layerdrop = 0.0; model.text_encoder.embed_tokens.weight.data.copy_(model.text_encoder.embed_tokens.weight.data.roll(1, 0))'
$E utils/omnivoice/adapter.py '        if self.machine.grad_checkpointing:' \
  '        self.model.llm.embed_tokens.weight.data.copy_(self.model.llm.embed_tokens.weight.data.roll(1, 0)) if not ctx.resume_from else None
        if self.machine.grad_checkpointing:'
run "known rows re-initialised"
