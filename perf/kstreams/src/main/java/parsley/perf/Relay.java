package parsley.perf;

import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The Kafka Streams peer of python -m perf --peers (docs/performance.md): the minimal
 * topology stream(in).to(out), exactly_once_v2, byte-array serdes, one stream thread.
 *
 * <p>Arguments: bootstrap servers, input topic, output topic, application id, commit interval
 * in ms, records per poll, state directory. Prints "ready" once the instance is RUNNING;
 * SIGTERM closes it (the open transaction is committed) and the JVM exits.
 */
public final class Relay {
  private Relay() {}

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 7) {
      System.err.println("usage: Relay BOOTSTRAP IN OUT APP_ID COMMIT_MS MAX_POLL STATE_DIR");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Integer.parseInt(args[4]));
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[6]);
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG),
        Integer.parseInt(args[5]));
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 45_000);
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 3_000);

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(args[1], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .to(args[2], Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    CountDownLatch done = new CountDownLatch(1);
    streams.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.RUNNING) {
        System.out.println("ready");
        System.out.flush();
      }
      if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
        done.countDown();
      }
    });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      done.countDown();
    }));
    streams.start();
    done.await();
  }
}
