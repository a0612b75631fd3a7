// Preloaded into amqplib's test processes (NODE_OPTIONS=--require): its callback-API tests dial
// `amqp://localhost` with no port, i.e. 5672. Send those connections to the broker run.sh started
// on a free port instead, so the suite needs neither port 5672 nor a patched copy of amqplib.
'use strict';
const net = require('node:net');

const AMQP_DEFAULT_PORT = 5672;
const target = Number(process.env.HOURGLASS_AMQP_PORT);
const connect = net.connect;

function redirected(options, ...rest) {
  if (target && options && typeof options === 'object' && Number(options.port) === AMQP_DEFAULT_PORT) {
    return connect.call(this, { ...options, port: target }, ...rest);
  }
  return connect.call(this, options, ...rest);
}

net.connect = redirected;
net.createConnection = redirected;
