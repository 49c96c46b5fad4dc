"""The Python module: LLM(model).generate(prompts, SamplingParams(...)) batches prompts and gives each the output
it gets alone; chat() uses the DeepSeek chat template; bad prompts raise ValueError; backend= picks the kernels."""
import importlib
import sys

import pytest

from serve_fixture import BUILD, ensure_model


@pytest.fixture(scope="module")
def deepinfer():
    module_dir = BUILD / "python"
    if not any(module_dir.glob("deepinfer*.so")):
        pytest.skip(f"the Python module is not built in {module_dir} (needs pybind11-dev and the Python headers)")
    sys.path.insert(0, str(module_dir))
    try:
        return importlib.import_module("deepinfer")
    finally:
        sys.path.pop(0)


@pytest.fixture(scope="module")
def llm(deepinfer):
    engine = deepinfer.LLM(str(ensure_model()), threads=2)
    yield engine
    engine.shutdown()


def test_generate_batches_prompts_with_solo_outputs(deepinfer, llm):
    params = deepinfer.SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=0)
    prompts = ["Hello, my name is", [0, 128803, 30594, 128804], "The capital of France is"]
    together = llm.generate(prompts, params)
    alone = [llm.generate([p], params)[0] for p in prompts]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert [o.logprobs for o in together] == [o.logprobs for o in alone]
    assert all(len(o.token_ids) == 6 and o.finish_reason == "length" for o in together)
    assert together[0].text == alone[0].text and together[0].text


def test_seeded_sampling_is_reproducible(deepinfer, llm):
    params = deepinfer.SamplingParams(temperature=0.9, top_p=0.95, max_tokens=5, seed=1234)
    assert llm.generate(["Seeded"], params)[0].token_ids == llm.generate(["Seeded"], params)[0].token_ids


def test_chat_uses_the_template(deepinfer, llm):
    out = llm.chat([[{"role": "user", "content": "Hi"}], {"messages": [{"role": "user", "content": "Hi"}], "thinking": {"type": "disabled"}}],
                   deepinfer.SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    assert out[0].reasoning and not out[0].text  # thinking mode by default
    assert out[1].text and not out[1].reasoning
    assert out[0].prompt_tokens > 5


def test_bad_prompt_raises(deepinfer, llm):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.generate([[0, 10 ** 9]], deepinfer.SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match="temperature"):
        llm.generate(["x"], deepinfer.SamplingParams(temperature=-1))


def test_backend_choice(deepinfer):
    """backend='cuda' opens the model on the CUDA backend, or says why it cannot (a CPU-only build, no usable GPU);
    an unknown backend name is a ValueError."""
    with pytest.raises(ValueError, match="tpu"):
        deepinfer.LLM(str(ensure_model()), backend="tpu")
    try:
        deepinfer.LLM(str(ensure_model()), backend="cuda").shutdown()
    except RuntimeError as e:
        assert "CUDA" in str(e)
    else:
        pytest.skip("this build has the CUDA backend and a usable GPU")
