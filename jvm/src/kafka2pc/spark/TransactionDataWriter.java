package kafka2pc.spark;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * The DataSource's task side: one {@link PartitionTransaction} per Spark partition, as the
 * mapPartitions job runs it. {@code write} sends, {@code commit} flushes, describes and
 * leaves the transaction open (the {@link PreparedPartition}'s message is the commit one),
 * {@code abort} aborts. A partition a repair does not select writes nothing and reports
 * nothing (a null message).
 */
final class TransactionDataWriter implements DataWriter<InternalRow> {
    private final PartitionTransaction transaction;

    private TransactionDataWriter(PartitionTransaction transaction) {
        this.transaction = transaction;
    }

    @Override
    public void write(InternalRow row) {
        if (transaction == null) {
            return;
        }
        try {
            transaction.send(row);
        } catch (RuntimeException | Error failure) {
            throw transaction.failed(failure);
        }
    }

    @Override
    public WriterCommitMessage commit() {
        if (transaction == null) {
            return null;
        }
        try {
            return transaction.prepare().message();
        } catch (RuntimeException | Error failure) {
            throw transaction.failed(failure);
        }
    }

    @Override
    public void abort() {
        if (transaction != null) {
            transaction.abort(null);
        }
    }

    @Override
    public void close() {
        abort(); // a no-op after commit or abort: only a transaction still open is aborted
    }

    /** Shipped to the tasks with the settings inside (never in the plan's text). */
    static final class Factory implements DataWriterFactory {
        private static final long serialVersionUID = 1L;

        private final PrepareSpec spec;

        Factory(PrepareSpec spec) {
            this.spec = spec;
        }

        @Override
        public String toString() {
            return spec.toString();
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
            if (!spec.writes(partitionId)) {
                return new TransactionDataWriter(null); // a repair: not even an InitProducerId
            }
            TaskContext context = TaskContext.get();
            String hook = spec.hook != null ? spec.hook : context.getLocalProperty(WriterHook.PROPERTY);
            return new TransactionDataWriter(
                    new PartitionTransaction(spec, partitionId, context.attemptNumber(), hook));
        }
    }
}
