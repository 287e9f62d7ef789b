"""The smallest reproducer of librdkafka's enq_once use-after-free (docs/upstream/).

Freezes a running broker (SIGSTOP), makes one ``list_consumer_group_offsets`` call with a
1 s ``request_timeout`` from a new AdminClient, lets it time out, thaws the broker
(SIGCONT) and waits: the process aborts in ``rd_kafka_enq_once_del_source_return``
(or dies of SIGSEGV) once the client reaches the group coordinator.

Usage: python eonce_abort_minimal.py BOOTSTRAP BROKER_PID
"""

import os
import signal
import sys
import time

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

bootstrap, pid = sys.argv[1], int(sys.argv[2])
os.kill(pid, signal.SIGSTOP)
try:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions("g", [TopicPartition("t", 0)])]
    future = admin.list_consumer_group_offsets(request, request_timeout=1)["g"]
    try:
        future.result(timeout=10)
    except KafkaException as exc:
        print("as expected:", exc, flush=True)
finally:
    os.kill(pid, signal.SIGCONT)
time.sleep(10)  # the abort comes here, in librdkafka's main thread
print("no abort", flush=True)
