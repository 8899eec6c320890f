package kafka2pc.spark;

import java.util.TreeMap;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.RecordMetadata;

/**
 * The send callbacks' bookkeeping: each Kafka partition's first and last offset and count,
 * and the first failure. Called on the producer's I/O thread, read by the task's.
 */
final class Deliveries implements Callback {
    /** Topic, then partition: the order the Python writer lists its ranges in. */
    private final TreeMap<String, TreeMap<Integer, Committable.Range>> partitions =
            new TreeMap<>();
    private long count;
    private String lastTopic;
    private int lastPartition = -1;
    private Committable.Range last;
    private volatile Exception error;

    @Override
    public synchronized void onCompletion(RecordMetadata metadata, Exception exception) {
        if (exception != null) {
            if (error == null) {
                error = exception;
            }
            return;
        }
        String topic = metadata.topic();
        int partition = metadata.partition();
        // Consecutive deliveries are mostly to one partition: skip the two map look-ups.
        if (partition != lastPartition || !topic.equals(lastTopic)) {
            last = partitions.computeIfAbsent(topic, t -> new TreeMap<>())
                    .computeIfAbsent(partition, p -> new Committable.Range());
            lastTopic = topic;
            lastPartition = partition;
        }
        last.add(metadata.offset());
        count++;
    }

    synchronized long count() {
        return count;
    }

    synchronized TreeMap<String, TreeMap<Integer, Committable.Range>> partitions() {
        return partitions;
    }

    /** Fails the task at the first failed delivery, naming it. */
    void raiseFirstError() {
        Exception failed = error;
        if (failed != null) {
            throw new IllegalStateException("delivery failed: "
                    + failed.getClass().getSimpleName() + ": " + failed.getMessage(), failed);
        }
    }
}
