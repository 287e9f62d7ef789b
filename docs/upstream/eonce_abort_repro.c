/*
 * The smallest C reproducer of the enq_once use-after-free in coordinator-routed
 * admin requests (docs/upstream/librdkafka-eonce-abort.md).
 *
 * Freezes a running broker (SIGSTOP), makes one ListConsumerGroupOffsets request with
 * a 1 s request timeout from a new client, lets it time out, thaws the broker (SIGCONT)
 * and keeps the client for 10 s: the process aborts in
 * rd_kafka_enq_once_del_source_return once the client reaches the group coordinator.
 *
 * Build: cc -o eonce_abort_repro eonce_abort_repro.c -lrdkafka
 * Run:   ./eonce_abort_repro BOOTSTRAP BROKER_PID
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

int main(int argc, char **argv) {
        char errstr[512];
        rd_kafka_conf_t *conf;
        rd_kafka_t *rk;
        rd_kafka_queue_t *queue;
        rd_kafka_AdminOptions_t *options;
        rd_kafka_topic_partition_list_t *partitions;
        rd_kafka_ListConsumerGroupOffsets_t *request;
        rd_kafka_event_t *event;
        pid_t broker;

        if (argc != 3) {
                fprintf(stderr, "usage: %s BOOTSTRAP BROKER_PID\n", argv[0]);
                return 2;
        }
        broker = (pid_t)atoi(argv[2]);
        setvbuf(stdout, NULL, _IOLBF, 0);
        printf("librdkafka %s\n", rd_kafka_version_str());

        kill(broker, SIGSTOP);

        conf = rd_kafka_conf_new();
        if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[1], errstr,
                              sizeof(errstr)) != RD_KAFKA_CONF_OK) {
                fprintf(stderr, "%s\n", errstr);
                kill(broker, SIGCONT);
                return 1;
        }
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!rk) {
                fprintf(stderr, "%s\n", errstr);
                kill(broker, SIGCONT);
                return 1;
        }
        queue = rd_kafka_queue_new(rk);

        options = rd_kafka_AdminOptions_new(
            rk, RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS);
        rd_kafka_AdminOptions_set_request_timeout(options, 1000, errstr,
                                                  sizeof(errstr));
        partitions = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(partitions, "t", 0);
        request = rd_kafka_ListConsumerGroupOffsets_new("g", partitions);
        rd_kafka_topic_partition_list_destroy(partitions);

        rd_kafka_ListConsumerGroupOffsets(rk, &request, 1, options, queue);
        rd_kafka_ListConsumerGroupOffsets_destroy(request);
        rd_kafka_AdminOptions_destroy(options);

        event = rd_kafka_queue_poll(queue, 10 * 1000);
        printf("result: %s\n",
               event ? rd_kafka_event_error_string(event) : "(none in 10 s)");
        if (event)
                rd_kafka_event_destroy(event);

        kill(broker, SIGCONT);
        sleep(10); /* the abort comes here, in librdkafka's main thread */
        printf("no abort\n");

        rd_kafka_queue_destroy(queue);
        rd_kafka_destroy(rk);
        return 0;
}
