package kafka2pc.spark;

import java.util.Collections;
import java.util.Iterator;

import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;

/**
 * Executor side of {@link JvmWriter#prepare}: one Spark partition becomes one open Kafka
 * transaction ({@link PartitionTransaction}) and one result row for the driver.
 *
 * <p>Holds the producer settings, credentials included, in fields only: Spark 4.3's plan
 * (its UI's SQL tab, {@code explain()}) names the lambda it wraps this function in, and
 * {@link #toString()} names only the topic and the number of ids, should anything print it.
 */
final class PartitionWriter implements FlatMapFunction<Iterator<InternalRow>, Row> {
    private static final long serialVersionUID = 1L;

    private final PrepareSpec spec;

    PartitionWriter(PrepareSpec spec) {
        this.spec = spec;
    }

    @Override
    public String toString() {
        return spec.toString();
    }

    @Override
    public Iterator<Row> call(Iterator<InternalRow> rows) {
        TaskContext context = TaskContext.get();
        int partition = context.partitionId();
        if (!spec.writes(partition)) {
            return Collections.emptyIterator(); // a repair: not even an InitProducerId
        }
        String hook = spec.hook != null ? spec.hook : context.getLocalProperty(WriterHook.PROPERTY);
        PartitionTransaction transaction =
                new PartitionTransaction(spec, partition, context.attemptNumber(), hook);
        try {
            while (rows.hasNext()) {
                transaction.send(rows.next());
            }
            return Collections.singletonList(transaction.prepare().toRow()).iterator();
        } catch (RuntimeException | Error failure) {
            throw transaction.failed(failure);
        }
    }
}
