// The Go producer on Sarama (github.com/IBM/sarama), the client of the original failover
// partitioner, as the comparison drives it: an AsyncProducer with Sarama's defaults except
// RequiredAcks = WaitForAll (the scenario's premise; Sarama's default is WaitForLocal) and
// Return.Successes = true (Sarama's default is false; without it there is no delivery report).
// Idempotence stays off, Sarama's default. Keyless records, so the default hash partitioner
// picks a random partition for each.
//
// Its command line and output are JavaProducer.java's, so the harness reads both the same way:
//
//	sarama-producer steady BOOTSTRAP TOPIC RATE_PER_S DURATION_S VALUE_BYTES
//	sarama-producer burst  BOOTSTRAP TOPIC COUNT      0          VALUE_BYTES
//
// "start" once the producer exists and the clock starts; after AsyncClose has flushed every
// buffered record, "sent N", "block_us B" (the longest a send into Input() waited) and one line
// per message, "a ID PARTITION SEND_US ACK_US" or "e ID - SEND_US ACK_US ERROR" (microseconds
// since start); in burst mode "elapsed_us E" and "acked K" instead of the per-message lines.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// outcomes holds what became of each message, indexed by its id; each index is written by one
// goroutine and read only after all of them are done.
type outcomes struct {
	sendUs, ackUs []int64
	partition     []int32
	errName       []string
}

func newOutcomes(capacity int) *outcomes {
	o := &outcomes{
		sendUs:    make([]int64, capacity),
		ackUs:     make([]int64, capacity),
		partition: make([]int32, capacity),
		errName:   make([]string, capacity),
	}
	for i := range o.ackUs {
		o.ackUs[i] = -1
	}
	return o
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9]+`)

// errorName is one word for the report: a Kafka error as KError<code>, else the message.
func errorName(err error) string {
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		return "KError" + strconv.Itoa(int(kerr))
	}
	name := unsafeChars.ReplaceAllString(err.Error(), "_")
	if len(name) > 60 {
		name = name[:60]
	}
	return name
}

// collect reads the producer's reports until AsyncClose closes both channels.
func collect(producer sarama.AsyncProducer, start time.Time, o *outcomes) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for msg := range producer.Successes() {
			n := msg.Metadata.(int)
			o.ackUs[n] = time.Since(start).Microseconds()
			o.partition[n] = msg.Partition
		}
	}()
	go func() {
		defer wg.Done()
		for perr := range producer.Errors() {
			n := perr.Msg.Metadata.(int)
			o.ackUs[n] = time.Since(start).Microseconds()
			o.errName[n] = errorName(perr.Err)
		}
	}()
	return &wg
}

func value(i, valueBytes int) []byte {
	v := []byte(strings.Repeat("x", valueBytes))
	copy(v, fmt.Sprintf("%010d", i))
	return v
}

func main() {
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: sarama-producer steady|burst BOOTSTRAP TOPIC AMOUNT DURATION_S VALUE_BYTES")
		os.Exit(2)
	}
	mode, bootstrap, topic := os.Args[1], os.Args[2], os.Args[3]
	amount, err1 := strconv.ParseFloat(os.Args[4], 64)
	durationS, err2 := strconv.ParseFloat(os.Args[5], 64)
	valueBytes, err3 := strconv.Atoi(os.Args[6])
	if err := errors.Join(err1, err2, err3); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	capacity := int(amount)
	if mode == "steady" {
		capacity = int(math.Ceil(amount * durationS))
	}

	config := sarama.NewConfig()
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	client, err := sarama.NewClient(strings.Split(bootstrap, ","), config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	defer client.Close()
	// Metadata first, as every other contender does before its clock starts.
	if _, err := client.Partitions(topic); err != nil {
		fmt.Fprintln(os.Stderr, "metadata:", err)
		os.Exit(1)
	}
	producer, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}

	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	out.WriteString("start\n")
	out.Flush()
	start := time.Now()
	o := newOutcomes(capacity)
	done := collect(producer, start, o)
	sent, longestBlock := send(producer, mode, amount, durationS, valueBytes, topic, start, o)
	producer.AsyncClose() // flushes what is buffered, retries included, then closes the channels
	done.Wait()
	elapsed := time.Since(start)
	report(out, mode, sent, longestBlock, elapsed, o)
	out.Flush()
}

// send paces (steady) or pours (burst) the messages into Input(); how many, and the longest wait.
func send(
	producer sarama.AsyncProducer, mode string, amount, durationS float64, valueBytes int,
	topic string, start time.Time, o *outcomes,
) (int, time.Duration) {
	end := time.Duration(durationS * float64(time.Second))
	var longest time.Duration
	sent := 0
	for i := range o.sendUs {
		if mode == "steady" {
			now := time.Since(start)
			if now >= end {
				break
			}
			if due := time.Duration(float64(i) * float64(time.Second) / amount); due > now {
				time.Sleep(due - now)
			}
		}
		msg := &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(value(i, valueBytes)), Metadata: i}
		before := time.Now()
		o.sendUs[i] = before.Sub(start).Microseconds()
		producer.Input() <- msg
		longest = max(longest, time.Since(before))
		sent = i + 1
	}
	return sent, longest
}

func report(out *bufio.Writer, mode string, sent int, longestBlock, elapsed time.Duration, o *outcomes) {
	fmt.Fprintf(out, "sent %d\nblock_us %d\n", sent, longestBlock.Microseconds())
	if mode == "burst" {
		acked := 0
		for i := 0; i < sent; i++ {
			if o.ackUs[i] >= 0 && o.errName[i] == "" {
				acked++
			}
		}
		fmt.Fprintf(out, "elapsed_us %d\nacked %d\n", elapsed.Microseconds(), acked)
		return
	}
	for i := 0; i < sent; i++ {
		switch {
		case o.errName[i] != "":
			fmt.Fprintf(out, "e %d - %d %d %s\n", i, o.sendUs[i], o.ackUs[i], o.errName[i])
		case o.ackUs[i] >= 0:
			fmt.Fprintf(out, "a %d %d %d %d\n", i, o.partition[i], o.sendUs[i], o.ackUs[i])
		}
	}
}
