import pytest

from combee_core.settings import CombeeSettings, SettingsError


def test_environment_then_overrides():
    env = {"COMBEE_BATCH_SIZE": "12", "COMBEE_TOPIC_PREFIX": "x.", "COMBEE_KAFKA_BOOTSTRAP": ""}
    settings = CombeeSettings.load(env, topic_prefix="y.")
    assert settings.batch_size == 12
    assert settings.topic_prefix == "y."
    assert settings.kafka_bootstrap is None
    assert settings.topic("traces") == "y.traces"


def test_bad_value_names_the_variable():
    with pytest.raises(SettingsError, match="COMBEE_BATCH_SIZE"):
        CombeeSettings.load({"COMBEE_BATCH_SIZE": "zero"})
