"""The MMS-TTS model pieces, on tiny random bases in the public layout (tests/mms_fixtures.py): speech equal to
transformers' own VitsModel sample for sample, text ids equal to transformers' VitsTokenizer (uroman) after the
studio's normaliser, what the pronunciation dictionary can and cannot change, the discriminator read from the
original VITS checkpoint layout, and the training forward's losses reaching every part of the generator."""
from __future__ import annotations

import pytest
import torch

from tests.cuda_autocast import cuda_fp32_rule, output_dtypes
from tests.mms_fixtures import LETTERS, TINY, original_discriminator, tiny_base
from utils.events import StudioError


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_base(tmp_path_factory.mktemp("mms") / "base")


def test_speech_is_transformers_own_vits_sample_for_sample(base):
    from transformers import VitsModel, VitsTokenizer

    from utils.mms.base import build_generator, describe_base
    from utils.mms.speech import MmsSpeaker, speak_ids
    from utils.text import normalize

    start = describe_base(base)
    ours, theirs = build_generator(start).eval(), VitsModel.from_pretrained(base).eval()
    tokenizer = VitsTokenizer.from_pretrained(base)
    text = "ሰላም ነው። እንዴት ነህ?"
    inputs = tokenizer(normalize(text).text, return_tensors="pt")
    torch.manual_seed(7)
    with torch.no_grad():
        expected = theirs(**inputs).waveform[0]
    spoken = speak_ids(ours, [start["text"].encode(text)], seed=7)[0]
    assert torch.equal(spoken, expected)

    # the Voice's call: its generator's draw seeds the same noise; a batch trims each sentence to its own length
    outs = MmsSpeaker(ours).synthesise_batch([start["text"].encode(text), start["text"].encode("ሰላም")], [0, 0], 1,
                                             0.667, 1.0, torch.Generator().manual_seed(0))
    assert len(outs[0]["wave"]) > len(outs[1]["wave"]) > 0 and outs[0]["mel"].shape[0] == 80
    slower = speak_ids(ours, [start["text"].encode(text)], seed=7, length_scale=1.5)[0]
    assert len(slower) > len(spoken)


def test_text_is_read_as_vits_tokenizer_reads_the_normalised_text_numbers_read_out(base):
    from transformers import VitsTokenizer

    from utils.mms.text import MmsText, romanize
    from utils.text import normalize

    text = MmsText.from_folder(base)
    tokenizer = VitsTokenizer.from_pretrained(base)
    for sentence in ("ሰላም ነው። እንዴት ነህ?", "በ1987 ዓ.ም ዶ/ር አበበ 25 ብር ከፈሉ።", "ቋንቋ ጨረስኩት፤ ኮምፒዩተር!"):
        assert text.encode(sentence) == tokenizer(normalize(sentence).text)["input_ids"], sentence
    assert romanize("ሰላም ነው") == "salaame nawe"
    assert text.latin("በ1987 ዓ.ም") == "baaseraa zatanye mato samaaneyaa sabaate amata meherate"  # read out
    ids = text.encode("ሰላም")
    assert ids[0::2] == [0] * (len(ids) // 2 + 1) and set(ids[1::2]) <= set(range(len(LETTERS)))  # blanks (id 0)


def test_the_dictionary_changes_consonants_and_vowels_but_not_length_or_ejectives(base):
    from utils.mms.text import MmsText, respell, romanize

    text = MmsText.from_folder(base)
    assert respell("s ə l a m".split()) == "salaame"        # uroman's own spelling of ሰላም
    assert respell("s ə lː a m".split()) == "salaame"       # gemination cannot be written
    assert respell("kʼʷ a n kʼʷ a".split()) == "qwaaneqwaa"  # labialised, sixth order between consonants
    assert respell("tʼ ɨ r u".split()) == respell("t ɨ r u".split())  # ejective t reads as plain t
    plain = text.encode("ሰላም ነው")
    assert text.encode("ሰላም ነው", {"ሰላም": "s ə lː a m".split()}) == plain
    changed = text.encode("ሰላም ነው", {"ሰላም": "s e l a m".split()})
    assert changed != plain and text.latin("ሰላም ነው", {"ሰላም": "s e l a m".split()}) == "seelaame nawe"
    assert text.latin("BBC") == romanize("ቢቢሲ")  # an abbreviation is spelled, unless the dictionary holds it
    assert text.latin("BBC", {"BBC": "b i b i s i".split()}) == respell("b i b i s i".split())
    assert text.latin("bbc", {"BBC": "b i b i s i".split()}) == respell("b i b i s i".split())  # in any case,
    assert text.latin("BBC", {"bbc": "b i b i s i".split()}) == respell("b i b i s i".split())  # as Matcha reads


def test_a_base_that_is_not_mms_is_refused_naming_the_files(base, tmp_path):
    from utils.mms.base import describe_base

    with pytest.raises(StudioError, match="is not an MMS-TTS base: it needs transformers' VITS files"):
        describe_base(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"is_uroman": false}')
    for name in ("config.json", "model.safetensors", "vocab.json"):
        (tmp_path / name).write_bytes((base / name).read_bytes())
    with pytest.raises(StudioError, match="is_uroman: true"):
        describe_base(tmp_path)


def test_the_discriminator_loads_from_the_original_vits_checkpoint_layout(tmp_path):
    from models.vits_discriminator import VitsDiscriminator, sizes_of
    from utils.mms.base import build_discriminator

    expected = original_discriminator(tmp_path / "D_100000.pth")
    logged = []
    model = build_discriminator({"discriminator": tmp_path / "D_100000.pth"}, logged.append)
    state = model.state_dict()
    assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in state)
    assert "D_100000.pth" in logged[0]
    logits, features = model(torch.randn(2, 8192))
    assert len(logits) == 3 and [len(f) for f in features] == [7, 4, 4]  # every layer's map, the first included
    published = VitsDiscriminator()
    assert sizes_of(published.state_dict())["scale_channels"] == (16, 64, 256, 1024, 1024, 1024)
    assert round(sum(p.numel() for p in published.parameters()) / 1e6, 1) == 46.7

    logged.clear()
    random = build_discriminator({"discriminator": None}, logged.append)
    assert isinstance(random, VitsDiscriminator) and "slower, less stable start" in logged[0]


def test_the_real_audio_under_the_decoders_windows_is_cut_on_the_device_without_reading_its_starts():
    """The real audio and mel under each decoder window were cut by a max and a slice per row of starts that live on
    the GPU: 2B + 2 reads on the host a step, each a stall. One gather now gives the same windows (zeros past the
    end), and under fake CUDA tensors, where any read of a value raises, it runs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from models.vits_training import windows

    for shape in [(3, 100), (3, 1, 100), (3, 80, 37)]:
        x, starts = torch.randn(*shape), torch.tensor([0, 9, shape[-1] - 4])  # the last one runs past the end
        cut = windows(x, starts, 20)
        assert cut.shape == (*shape[:-1], 20)
        for row, start in enumerate(starts.tolist()):
            real = x[row, ..., start: start + 20]
            assert torch.equal(cut[row, ..., : real.shape[-1]], real) and not cut[row, ..., real.shape[-1]:].any()
    with FakeTensorMode():
        wave, starts = torch.randn(4, 8192, device="cuda"), torch.randint(0, 4096, (4,), device="cuda")
        assert windows(wave, starts, 2048).shape == (4, 2048) and windows(wave, starts, 2048).device.type == "cuda"


def test_the_training_forward_reaches_every_part_of_the_generator(base):
    from models.alignment import sequence_mask
    from models.vits_training import training_forward
    from utils.mms.base import build_generator, describe_base
    from utils.mms.features import spectrogram

    start = describe_base(base)
    vits = build_generator(start).train()
    ids = [start["text"].encode("ሰላም ነው"), start["text"].encode("ዛሬ ጥሩ ቀን ነው")]
    waves = [torch.randn(16000) * 0.1, torch.randn(24000) * 0.1]
    specs = [spectrogram(w) for w in waves]
    batch_ids = torch.zeros(2, max(map(len, ids)), dtype=torch.long)
    batch_spec = torch.zeros(2, 513, max(s.shape[-1] for s in specs))
    for i in range(2):
        batch_ids[i, : len(ids[i])] = torch.tensor(ids[i])
        batch_spec[i, :, : specs[i].shape[-1]] = specs[i]
    out = training_forward(vits, batch_ids, sequence_mask(torch.tensor(list(map(len, ids)))),
                           batch_spec, sequence_mask(torch.tensor([s.shape[-1] for s in specs])), segment=32)
    assert out.wave.shape == (2, 32 * 256) and torch.isfinite(out.kl) and torch.isfinite(out.duration)
    assert (out.starts >= 0).all() and (out.starts <= torch.tensor([62 - 32, 93 - 32])).all()
    (out.wave.abs().mean() + out.kl + out.duration).backward()
    for part in ("text_encoder", "posterior_encoder", "flow", "decoder", "duration_predictor"):
        grads = [p.grad for p in getattr(vits, part).parameters() if p.requires_grad]
        assert any(g is not None and g.abs().sum() > 0 for g in grads), part


def test_training_runs_every_text_encoder_layer_whatever_numpys_state(base):
    """transformers' config gives VITS a 10 % layer drop drawn from numpy, outside every torch seed: a resume would not
    retrace its run and a test would miss a layer one time in ten (CI once did). The studio's generator has none."""
    import numpy as np

    from models.alignment import sequence_mask
    from utils.mms.base import build_generator, describe_base

    vits = build_generator(describe_base(base)).train()
    layer = vits.text_encoder.encoder.layers[0]
    calls = []
    layer.register_forward_hook(lambda *_: calls.append(1))
    ids = torch.randint(1, len(LETTERS), (1, 9))
    for seed in range(40):
        np.random.seed(seed)
        vits.text_encoder(ids, padding_mask=sequence_mask(torch.tensor([9])).unsqueeze(-1).float())
    assert len(calls) == 40


def test_under_cuda_autocasts_fp32_rule_the_generators_activations_stay_bf16(base):
    """CUDA autocast returns layer_norm, softmax and exp in fp32 where CPU autocast returns bf16 (tests/cuda_autocast.py
    plays its rule here; gpu_tests/test_bf16.py checks it on a GPU). With the masks in the compute dtype and the
    text encoder's embedding and LayerNorms cast back (hooks on transformers' modules), the text encoder, the
    WaveNets and the HiFi-GAN decoder run in bf16. fp32 on purpose: the posterior's sample z and the flow's latent
    (CUDA's exp makes them so; the KL and the alignment take them in fp32), the duration predictor (autocast off)
    and the weight-norm parametrizations (weights, not activations)."""
    import functools

    from models.alignment import sequence_mask
    from models.vits_training import training_forward
    from utils.mms.base import build_generator, describe_base

    torch.manual_seed(0)
    vits = build_generator(describe_base(base)).train()
    dtypes, _ = output_dtypes(vits)
    ids, spec = torch.randint(1, len(LETTERS), (2, 21)), torch.rand(2, 513, 93)
    with cuda_fp32_rule():
        out = training_forward(vits, ids, sequence_mask(torch.tensor([21, 15])), spec,
                               sequence_mask(torch.tensor([93, 62])), segment=32,
                               amp=functools.partial(torch.autocast, "cpu", dtype=torch.bfloat16))
    fp32 = {n for n, d in dtypes.items() if d == torch.float32
            and not n.startswith("duration_predictor") and ".parametrizations." not in n}
    assert fp32 == {"posterior_encoder", "flow", "flow.flows.0"}, fp32
    assert {"text_encoder.encoder.layers.0", "text_encoder.encoder.layers.0.final_layer_norm", "decoder",
            "posterior_encoder.wavenet", "flow.flows.0.wavenet"} <= set(dtypes)
    assert out.wave.dtype == torch.float32 and torch.isfinite(out.wave).all() and torch.isfinite(out.kl + out.duration)



class OlderVits(torch.nn.Module):
    """transformers' VitsModel as releases before 5.3 call it: forward has no `speaking_rate` argument (a TypeError)
    and reads the speed from the model's attribute, as it reads its noise scales."""

    def __init__(self, vits):
        super().__init__()
        self.inner = vits

    def __getattr__(self, name):
        if name in ("noise_scale", "noise_scale_duration", "speaking_rate"):
            return getattr(self._modules["inner"], name)
        return super().__getattr__(name)

    def __setattr__(self, name, value):
        if name in ("noise_scale", "noise_scale_duration", "speaking_rate"):
            setattr(self._modules["inner"], name, value)
        else:
            super().__setattr__(name, value)

    def forward(self, input_ids=None, attention_mask=None):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask)


def test_mms_speech_and_its_onnx_graph_set_the_speed_as_every_transformers_reads_it():
    """speaking_rate= exists as an argument from transformers 5.3 only: older releases (the requirements allowed
    4.40) failed at the first evaluation and export. The speed is now set on the model, as the noise scales."""
    from transformers import VitsConfig, VitsModel

    from models.onnx_graphs import VitsGraph
    from utils.mms.speech import speak_ids

    torch.manual_seed(0)
    vits = OlderVits(VitsModel(VitsConfig(**TINY)).eval())
    ids = [[3, 5, 7, 9, 11, 13, 5, 7]]
    normal = speak_ids(vits, ids, seed=0, length_scale=1.0)[0]
    slow = speak_ids(vits, ids, seed=0, length_scale=2.0)[0]
    assert 1.6 < len(slow) / len(normal) < 2.4, (len(normal), len(slow))
    assert vits.speaking_rate == 1.0  # put back after the call
    graph = VitsGraph(vits)
    wave, n = graph(torch.tensor(ids), torch.tensor([0.0]), torch.tensor([0.0]), torch.tensor([2.0]))
    again, m = graph(torch.tensor(ids), torch.tensor([0.0]), torch.tensor([0.0]), torch.tensor([1.0]))
    assert 1.6 < int(n) / int(m) < 2.4 and vits.noise_scale == VitsConfig().noise_scale
